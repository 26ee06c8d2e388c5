// Placeholder: the D-Bus layer is being written (issue 3).
