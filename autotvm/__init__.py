"""autotvm"""
