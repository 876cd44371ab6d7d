"""Does the default matrix catch a bug? The bugs of tools/tester/bugs.py (each with its
own ``hint``) through the outside testers' one driver (tools/tester_common/measure.py):

    python -m tools.tester.measure BUG [BUG...] [--out FILE] [--matrix M --goldens G]
"""

from __future__ import annotations

from tools.tester_common.measure import main

if __name__ == "__main__":
    main("tools.tester.bugs", "tools.tester.measure")
