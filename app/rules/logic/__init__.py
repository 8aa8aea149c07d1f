"""logic"""
