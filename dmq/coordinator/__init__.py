"""The coordinator runtime shared by dmq's coordinators (see ``runtime.py``)."""
