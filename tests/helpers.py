"""Helpers shared by the tests (imported as ``from helpers import ...``)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(*parts):
    """A script of the repository (``load_script('examples', 'train_digits.py')``)
    imported as a module, without running its ``__main__`` block."""
    path = os.path.join(ROOT, *parts)
    spec = importlib.util.spec_from_file_location(os.path.splitext(parts[-1])[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
