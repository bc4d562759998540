"""The library of primitive implementations: importing this module registers all of them."""
