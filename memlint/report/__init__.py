"""Reporters: each turns the outcomes of a run into text for a terminal or another tool."""
