"""Start the ot_gradio page: `python app.py [--host 127.0.0.1] [--port 7860] [--share --auth USER:PASS]`."""

import sys

from ot_gradio.ui.launch import main

if __name__ == "__main__":
    sys.exit(main())
