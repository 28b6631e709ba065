"""Fuzzing of every input against real processes (issue 9).

Property everywhere: never a 5xx and never a crash; a bad input gets a clear 4xx (a
non-empty message) and changes nothing (the repository's fingerprint and the head of the
transaction log are the same after it). ``settings.py`` holds the profiles ("ci" bounded,
"long" for ``make fuzz``); ``strategies.py`` the generators.
"""
