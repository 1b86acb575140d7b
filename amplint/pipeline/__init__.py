"""One path per file for `amplint check`: `discovery` finds the files, `check` reads each, asks the
`cache`, lints it (`amplint.rules.runner`; `notebook` for notebooks) or fixes it
(`amplint.fixing`), stores the result and collects the run; `pool` spreads the lint over worker
processes; `baseline` filters known findings; `progress` tells the terminal; `verify`
(`--confirm --fix`) keeps only the fixes a new trace confirms. It imports the rules, the static,
runtime and fixing packages; only `amplint.cli`, `amplint.api` and the integrations import it."""
