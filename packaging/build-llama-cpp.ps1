# Rebuild llama-cpp-python for one backend on Windows (PowerShell 5.1 or 7).
#
#     powershell -ExecutionPolicy Bypass -File packaging\build-llama-cpp.ps1 -Backend cuda [-Python PY] [-Version X] [-DryRun]
#
# Backend: cpu | cuda | vulkan. Needs Visual Studio 2022 Build Tools ("Desktop development with C++")
# and CMake; cuda needs the CUDA toolkit (nvcc, CUDA_PATH), vulkan the Vulkan SDK (VULKAN_SDK).
# Run it from a "Developer PowerShell for VS 2022" so the compiler is found.
param(
    [Parameter(Mandatory = $true)][ValidateSet("cpu", "cuda", "vulkan")][string]$Backend,
    [string]$Python = "",
    [string]$Version = "",
    [switch]$DryRun
)
$ErrorActionPreference = "Stop"

if (-not $Python) {
    if (Test-Path ".venv\Scripts\python.exe") { $Python = ".venv\Scripts\python.exe" } else { $Python = "python" }
}
if (-not $Version) {
    $Version = & $Python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))" 2>$null
    if (-not $Version) { $Version = "0.3.36" }
}
$flags = @{ cpu = "-DGGML_NATIVE=on"; cuda = "-DGGML_CUDA=on"; vulkan = "-DGGML_VULKAN=on" }
$expect = @{ cpu = "CPU"; cuda = "CUDA"; vulkan = "Vulkan" }
$cmakeArgs = $flags[$Backend]
if ($Backend -eq "cuda" -and $env:CUDA_ARCHS) { $cmakeArgs += " -DCMAKE_CUDA_ARCHITECTURES=$($env:CUDA_ARCHS)" }

# --no-cache-dir: pip would reuse the wheel it built before; --no-deps: numpy and friends stay as they are.
$pipArgs = @("-m", "pip", "install", "--force-reinstall", "--no-cache-dir", "--no-deps", "--verbose",
             "llama-cpp-python==$Version")
Write-Output "`$env:CMAKE_ARGS=`"$cmakeArgs`"; $Python $($pipArgs -join ' ')"
if ($DryRun) { exit 0 }

$env:CMAKE_ARGS = $cmakeArgs
& $Python @pipArgs
if ($LASTEXITCODE -ne 0) { Write-Error "build failed"; exit 1 }

$got = (& $Python -m localrun info --json | ConvertFrom-Json).build.backend
if ($got -notlike "*$($expect[$Backend])*") { Write-Error "the build reports '$got', not $($expect[$Backend])"; exit 1 }
Write-Output "ok: llama-cpp-python $Version built with $got"
