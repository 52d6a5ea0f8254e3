# placeholder: the bundled hung job (being written)
