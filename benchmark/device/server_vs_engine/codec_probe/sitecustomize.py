"""The step probe (benchmark/device/step_probe/sitecustomize.py), loaded as is, plus one record per
process: which minisgl/message/base.py it imported and whether that is the attrgetter codec
(5a27469, `_GETTERS`) -> tree-<pid>.txt under $PROBE_DIR. For codec_ab.py's two servers."""

import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "step_probe", "sitecustomize.py")
_spec = importlib.util.spec_from_file_location("_step_probe", _path)
_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_probe)


def _tree(mod):
    _probe._write("tree", f"message.base {os.path.realpath(mod.__file__)} attrgetter_codec="
                          f"{hasattr(mod, '_GETTERS')}\n")


_probe._TARGETS["minisgl.message.base"] = _tree
