// Rung 12: ring attention over P GPUs, one process per GPU (ring.cu). It has its own main
// rather than the shared runner's: the runner runs one process on one GPU, and the tour, the
// bench and the registry-wide tests iterate single-process rungs. Start P > 1 ranks with
// launch_ring.py; --gpus 1 (the default) runs the degenerate ring in this process.
namespace fl::ring {
int ring_main(int argc, char** argv);
}

int main(int argc, char** argv) {
  return fl::ring::ring_main(argc, argv);
}
