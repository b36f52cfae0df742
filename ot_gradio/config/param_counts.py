"""Parameters per model part, per family: the Model tab's memory table reads them (torch-free).
Each family's counts are in its description (config/family_info/<family>.py, `params`), with
how they were counted; the parts several families share are in config/family_info/_sizes.py."""

from .families import FAMILIES

PARAMS: dict[str, dict[str, int]] = {m.value: dict(info.params) for m, info in FAMILIES.items() if info.params}
# frozen modules beside the parts (LTX-2's text connectors, Wan 2.2 A14B's other expert, Ideogram 4's
# unconditional transformer): name -> (the part whose type they load in, parameters, "device" or "RAM")
EXTRA_PARAMS: dict[str, dict[str, tuple[str, int, str]]] = {m.value: dict(info.extra_params) for m, info in FAMILIES.items()
                                                           if info.extra_params}
