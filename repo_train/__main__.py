from repo_train.cli import main

raise SystemExit(main())
