from search.cli import main

raise SystemExit(main())
