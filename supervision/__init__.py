"""supervision package."""
