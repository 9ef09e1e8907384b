"""Workflows: the runs that combine the layers below (a conformance run, the acceptance gate, a
capacity sweep, a cutover check). Each takes a typed spec and returns a typed result; the
commands and :mod:`servecheck.api` call them. Nothing here parses options or imports a command.
"""
