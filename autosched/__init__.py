"""autosched"""
