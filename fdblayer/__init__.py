"""fdblayer package."""
