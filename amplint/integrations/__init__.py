"""Where amplint meets other tools: the language server (`lsp`), the pytest plugin
(`pytest_plugin`, the `amplint_lock` fixture) and the flake8 plugin (`flake8_plugin`). Each sits on
top of the pipeline and the lock package; nothing in amplint imports them."""
