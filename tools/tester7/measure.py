"""Does the default matrix catch a bug? The bugs of tools/tester7/bugs.py through the
outside testers' one driver (tools/tester_common/measure.py):

    python -m tools.tester7.measure BUG [BUG...] [--out FILE] [--matrix M] [--goldens G]
        [--filter PAT] [--live] [--all]
"""

from __future__ import annotations

from tools.tester_common.measure import main

if __name__ == "__main__":
    main("tools.tester7.bugs", "tools.tester7.measure")
