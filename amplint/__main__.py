from amplint.cli import main

raise SystemExit(main())
