import gc
import sys

# The command line's modules live as long as the process: the cyclic collector is paused
# while they load (some ten collections walked them, 1.5 ms of a cold `table`); cli.main
# pauses it again for the front end's imports and a table's specs.
gc.disable()
try:
    from .cli import main
finally:
    gc.enable()

sys.exit(main())
