from hetrl.cli import main

raise SystemExit(main())
