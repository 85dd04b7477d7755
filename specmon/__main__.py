from specmon.cli import main

raise SystemExit(main())
