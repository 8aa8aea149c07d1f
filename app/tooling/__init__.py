"""Tools beside the service: benchmarks, evaluation, int8 export, the demo clip and the view-check report."""
