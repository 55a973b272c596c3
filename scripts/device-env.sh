# Sourced by the GPU-host scripts, from the checkout's root: unpacks the
# bundle scripts/device-bundle.sh made (build-device.tar.xz, carried to the
# host) unless it is unpacked, and points the loader at its libraries.
[[ -d build-device ]] || tar -xJf build-device.tar.xz
export LD_LIBRARY_PATH=$PWD/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
