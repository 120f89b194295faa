"""Training the tiny Wan on moving-shapes clips: ``python -m models.training`` (see ``__main__``)."""
