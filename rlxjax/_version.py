"""The version of rlxjax: its one source.

pyproject.toml reads it (setuptools dynamic version), the package exports it as
``rlxjax.__version__`` and the lowering writes it into every program's metadata
('rlxjax.version'). A leaf module, so any layer can import it without importing the
package root."""
__version__ = "0.1.0.dev0"
