from batchlab.cli import main

raise SystemExit(main())
