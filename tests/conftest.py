"""Project-wide pytest settings: nothing here may start services; packages own their fixtures."""
