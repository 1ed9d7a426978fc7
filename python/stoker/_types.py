"""Type aliases of stoker's public signatures."""
import os
from typing import Any, Dict, Union

#: A path: a str or an os.PathLike (pathlib.Path).
PathLike = Union[str, "os.PathLike[str]"]
#: A batch: field name -> array (NumPy, torch or stoker's own Array, by the
#: loader's `output`).
Batch = Dict[str, Any]
