"""Pixels in, tensors out, and back: decoding, letterboxing, head decoding and NMS."""
