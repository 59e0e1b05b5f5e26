"""The site build behind ``build.py`` (stdlib + pytrain only), one module per job:

- :mod:`.paths`: where things are (the repository, build/, the npm inputs) and the build's log line
- :mod:`.wheel`: the pure-Python pytrain wheel
- :mod:`.bytecode`: Python 3.8 bytecode for the page (pytrain's zip, the start-up modules' bundle)
- :mod:`.pyodide`: the npm inputs and the Pyodide files the page needs
- :mod:`.assets`: the MNIST digits binary and the demo training artifacts
- :mod:`.site`: the site assembled (copy, config.json, sw.js stamp, precompressed twins) and when to rebuild
- :mod:`.compress`: the .br/.gz twins written at build time and picked per request by Accept-Encoding
- :mod:`.server`: the static server (and the Flower SuperLink proxy)
- :mod:`.installs`: what ``python build.py test`` installs before running the suite

Not part of the pytrain wheel (pyproject.toml packages ``pytrain*`` only).
"""
