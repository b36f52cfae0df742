import sys

if sys.argv[1:2] == ["train"]:  # the process is the run: no full collections during the imports
    from .runner import collection

    collection.pause()

from .cli import main

code = main()
if sys.argv[1:2] != ["app"]:  # the page stops TensorBoard at exit; every other command has closed its files
    from .runner.process_exit import exit_now

    exit_now(code)
sys.exit(code)
