"""ggml's tensor data types and llama.cpp's file types, by the numbers GGUF files store.

Facts of the file format (ggml's ``ggml_type`` and llama.cpp's ``llama_ftype``), kept here so that
reading a header (:mod:`.gguf_file`) needs neither the ``gguf`` package nor the numpy it imports:
those cost a daemon's first request for a model about 0.2 s. A number missing here (a type newer
than this table) is looked up in the installed ``gguf`` package, which llama.cpp extends with each
new type; a test checks that the two agree on every number both know.
"""

from __future__ import annotations

# ggml_type -> (elements per block, bytes per block)
BLOCK_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),     # F32 F16 Q4_0 Q4_1 Q5_0 Q5_1
    8: (32, 34), 9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144),     # Q8_0 Q8_1 Q2_K Q3_K Q4_K
    13: (256, 176), 14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74),  # Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS
    18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),   # IQ3_XXS IQ1_S IQ4_NL IQ3_S IQ2_S
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),  # IQ4_XS I8 I16 I32 I64 F64
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),       # IQ1_M BF16 TQ1_0 TQ2_0 MXFP4
    40: (64, 36), 41: (128, 18),                                                   # NVFP4 Q1_0
}

# llama_ftype (``general.file_type``) -> the name Ollama shows as the quantization level
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 1024: "GUESSED",
}


def block_size(ggml_type: int) -> tuple[int, int] | None:
    """(elements per block, bytes per block) of a tensor data type; None for a number nobody knows."""
    known = BLOCK_SIZES.get(ggml_type)
    if known is not None:
        return known
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None


def file_type_name(file_type: int) -> str:
    """The name of a ``general.file_type`` (``Q4_K_M``...); the number itself when nobody knows it."""
    known = FILE_TYPES.get(file_type)
    if known is not None:
        return known
    from gguf import LlamaFileType

    try:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return str(file_type)


__all__ = ["BLOCK_SIZES", "FILE_TYPES", "block_size", "file_type_name"]
