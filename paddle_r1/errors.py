"""The error every layer raises for a config that cannot run (models/, rewards/ and the trainer raise it too): at
the bottom, so that raising it imports nothing else."""


class ConfigError(ValueError):
    """A config that cannot run; the message names the key, value or path at fault. ``keys`` are the config keys
    at fault, so that ``load_config`` can say which file or command line set them."""

    def __init__(self, message: str, keys: tuple = ()):
        super().__init__(message)
        self.keys = tuple(keys)
