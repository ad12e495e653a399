"""tools/flashinfer_ext without a GPU or a compiler: the FlashInfer headers norm.cuh needs (transitively, beside the
includer first), the CUDA library headers looked for outside the toolkit, the copy, the build's include flags, and
our sources' own includes."""
import re
from pathlib import Path

import pytest

from tools.flashinfer_ext import build, headers

HERE = Path(build.__file__).resolve().parent


def tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FLASHINFER = {
    "flashinfer/norm.cuh": '#include <cstdint>\n#include "flashinfer/trtllm/common/cudaUtils.h"\n#include "math.cuh"\n'
                           '#include "utils.cuh"\n',
    "flashinfer/math.cuh": "// nothing included\n",
    "flashinfer/utils.cuh": '#include "exception.h"\n  #  include "math.cuh"\n',
    "flashinfer/exception.h": "#include <iostream>\n",
    "flashinfer/trtllm/common/cudaUtils.h": '// #include "tensorrt_llm/common/logger.h"\n#include <cublas_v2.h>\n'
                                            '#include "../../exception.h"\n',
    "flashinfer/attention/decode.cuh": '#include "../utils.cuh"\n',  # not needed by norm.cuh
}


def test_the_headers_norm_cuh_needs_transitively(tmp_path):
    include = tree(tmp_path, FLASHINFER)
    found, missing = headers.flashinfer_headers(include)
    assert found == ["flashinfer/exception.h", "flashinfer/math.cuh", "flashinfer/norm.cuh",
                     "flashinfer/trtllm/common/cudaUtils.h", "flashinfer/utils.cuh"]
    assert missing == []
    (include / "flashinfer/math.cuh").write_text('#include "vec_dtypes.cuh"\n#include "flashinfer/absent.h"\n')
    assert headers.flashinfer_headers(include)[1] == ["flashinfer/absent.h (from flashinfer/math.cuh)",
                                                      "vec_dtypes.cuh (from flashinfer/math.cuh)"]
    assert headers.flashinfer_headers(tmp_path / "nowhere") == ([], [headers.ROOT_HEADER])


def test_copy_takes_only_what_norm_cuh_needs(tmp_path):
    source = tree(tmp_path / "src", FLASHINFER)
    copied = headers.copy_headers(source, tmp_path / "dest")
    assert sorted(str(p.relative_to(tmp_path / "dest")) for p in (tmp_path / "dest").rglob("*") if p.is_file()) == copied
    assert "flashinfer/attention/decode.cuh" not in copied
    assert (tmp_path / "dest/flashinfer/norm.cuh").read_text() == FLASHINFER["flashinfer/norm.cuh"]
    (source / "flashinfer/math.cuh").unlink()
    with pytest.raises(ValueError, match=r"lacks headers norm.cuh includes: math.cuh \(from flashinfer/norm.cuh\), math.cuh \(from flashinfer/utils.cuh\)"):
        headers.copy_headers(source, tmp_path / "again")
    assert headers.main([str(source), str(tmp_path / "cli")]) == 1


def test_library_headers_come_from_pips_cuda_packages_where_the_toolkit_lacks_them(tmp_path):
    toolkit = tree(tmp_path / "cuda/include", {"cuda_runtime_api.h": "", "curand_kernel.h": ""})
    site = tree(tmp_path / "site", {"nvidia/cu13/include/cublas_v2.h": "", "nvidia/cu13/include/cublasLt.h": "",
                                    "nvidia/curand/include/curand_kernel.h": ""})
    other = tree(tmp_path / "other", {"nvidia/cublas/include/cublas_v2.h": ""})
    assert headers.library_include_dirs(toolkit, [other, site]) == [other / "nvidia/cublas/include",
                                                                    site / "nvidia/cu13/include"]
    assert headers.library_include_dirs(toolkit, []) == []


def test_include_flags_search_the_library_headers_after_the_toolkits(tmp_path):
    include = tree(tmp_path / "fi", FLASHINFER)
    site = tree(tmp_path / "site", {"nvidia/cu13/include/cublas_v2.h": "", "nvidia/cu13/include/cublasLt.h": "",
                                    "nvidia/cu13/include/curand_kernel.h": ""})
    paths, flags = build.include_flags(include, str(tmp_path / "cuda"), [site])
    assert paths == [str(include)] and flags == ["-isystem", str(site / "nvidia/cu13/include")]
    with pytest.raises(ValueError, match="lacks FlashInfer headers norm.cuh needs: flashinfer/norm.cuh"):
        build.include_flags(tmp_path / "site", None, [])


def test_our_sources_include_only_norm_cuh_of_flashinfer_and_it_only_in_norm_cu():
    includes = {name: re.findall(r'#include [<"]([^">]+)[">]', (HERE / name).read_text())
                for name in (*build.SOURCES, "norm_ext.h")}
    assert [i for i in includes["norm.cu"] if i.startswith("flashinfer/")] == ["flashinfer/norm.cuh"]
    assert not any(i.startswith("flashinfer/") for i in includes["binding.cpp"] + includes["norm_ext.h"])
    assert "norm_ext.h" in includes["norm.cu"] and "norm_ext.h" in includes["binding.cpp"]
    assert not any(i.startswith(("torch/", "ATen/", "c10/")) for i in includes["norm.cu"])


def test_the_build_flags_are_flashinfers_and_give_back_the_half_operators():
    flags = set(build.CUDA_FLAGS)
    assert {"-DENABLE_BF16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_F16", "-use_fast_math"} <= flags
    assert {"-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"} <= flags
