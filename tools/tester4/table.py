"""The bug table of reports/gate/outside-tester-r4/README.md (tools/tester_common/table.py).

    python -m tools.tester4.table
"""

from tools.tester4 import bugs
from tools.tester_common.table import print_table

if __name__ == "__main__":
    print_table(4, bugs)
