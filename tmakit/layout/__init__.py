"""CPU model of TMA: what a box load writes to shared memory, the swizzle, bank conflicts, pictures; the wgmma
descriptors that read a TMA-filled stage (wgmma.py)."""
from .banks import bank_conflicts
from .im2col import Im2colGeometry, check_im2col_start, im2col_geometry, im2col_load_image
from .swizzle import swizzle_offset, swizzle_pattern
from .tma_model import BoxGeometry, box_geometry, check_box_start, check_store_start, tma_load_image, tma_store
from .tma_reduce import tma_reduce_add
from .wgmma import WgmmaDescriptor, check_wgmma_descriptor, read_operand, wgmma_descriptors

__all__ = ["tma_load_image", "tma_store", "box_geometry", "BoxGeometry", "check_box_start", "check_store_start",
           "swizzle_offset", "swizzle_pattern", "bank_conflicts", "im2col_load_image", "im2col_geometry", "check_im2col_start",
           "Im2colGeometry", "tma_reduce_add",
           "WgmmaDescriptor", "check_wgmma_descriptor", "read_operand", "wgmma_descriptors"]
