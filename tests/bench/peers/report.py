import sys
print("report: TODO", file=sys.stderr)
