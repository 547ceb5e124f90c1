from workflows.cli import main

raise SystemExit(main())
