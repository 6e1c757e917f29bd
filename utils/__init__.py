"""Command-line utilities of the cuda_extension project (build, verification, profiling)."""
