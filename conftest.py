pytest_plugins = ["servecheck.pytest_plugin"]
