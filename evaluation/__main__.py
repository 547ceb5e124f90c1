from evaluation.cli import main

raise SystemExit(main())
