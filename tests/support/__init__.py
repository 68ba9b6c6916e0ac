"""Helpers shared by the test modules: servers, peers, clients, frames and waits.

A test module imports what it shares from here (or gets it as a fixture from
``tests/conftest.py``), never from another test module, so that each test module can be read,
run and changed on its own.
"""
