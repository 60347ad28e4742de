"""genbench: measure, forecast and run large generation jobs on OpenAI-compatible servers."""

__version__ = "0.1.0"
