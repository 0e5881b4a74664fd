"""lowered"""
