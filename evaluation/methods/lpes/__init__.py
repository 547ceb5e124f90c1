"""LPES in evaluation: the scale-file format, its curves and the `lpes` method that applies a file.

The format and curves live here, not in `search`, because both sides read
them: `search` writes scale files and builds genomes on the curves, while the
`lpes` method applies them, and `search` may import `evaluation` but never the
reverse. Importing this package registers `lpes:scale_file=PATH`.
"""

from evaluation.methods.lpes.method import LayerScaledRope, read_scales
from evaluation.methods.lpes.scale_file_format import ScaleFileError

__all__ = ["LayerScaledRope", "ScaleFileError", "read_scales"]
