"""Make Debian's torch 1.13 DCP importable under Python 3.11, without touching
the system files.

torch/distributed/_shard/sharded_tensor/metadata.py declares
`tensor_properties: TensorProperties = field(default=TensorProperties())`;
Python 3.11's dataclasses refuse an unhashable default ("mutable default ...
use default_factory"), so `import torch.distributed._shard.checkpoint` fails.
install() puts an import hook in front that loads that one module from its
own source with that one field turned into `default_factory=TensorProperties`.
Nothing else changes, and nothing on disk is modified.

Use:  import mn_torchcompat; mn_torchcompat.install()
      import torch.distributed._shard.checkpoint as dcp
"""
import importlib.abc
import importlib.machinery
import importlib.util
import sys

_MOD = "torch.distributed._shard.sharded_tensor.metadata"
_OLD = "field(default=TensorProperties())"
_NEW = "field(default_factory=TensorProperties)"


class _Loader(importlib.abc.SourceLoader):
    def __init__(self, fullname, path):
        self.fullname, self.path = fullname, path

    def get_filename(self, fullname):
        return self.path

    def get_data(self, path):
        with open(path, "rb") as f:
            data = f.read()
        if path == self.path:
            data = data.replace(_OLD.encode(), _NEW.encode())
        return data

    def get_code(self, fullname):  # never use the cached bytecode of the original
        return compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _MOD:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin:
            return None
        return importlib.util.spec_from_file_location(fullname, spec.origin,
                                                      loader=_Loader(fullname, spec.origin))


def install():
    if _MOD in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
