//! `doctor` for a multi-node recipe: per node, its engine, the NVIDIA runtime, a GPU, the
//! high-speed interface, and the nodes reaching each other on it.
