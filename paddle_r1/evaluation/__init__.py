"""Benchmarks: REC (RefCOCO/+/g, RefGTA), SuperCLEVR counting, GeoQA — scored with the training rewards."""
