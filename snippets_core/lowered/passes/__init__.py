"""lowered/passes"""
