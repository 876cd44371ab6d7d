"""The bug table of reports/gate/outside-tester-r3/README.md (tools/tester_common/table.py).

    python -m tools.tester3.table
"""

from tools.tester3 import bugs
from tools.tester_common.table import print_table

if __name__ == "__main__":
    print_table(3, bugs)
