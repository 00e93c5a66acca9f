import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line loads (numpy); the commands load later, in main
    print("salientpp: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
