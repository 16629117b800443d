"""Stand-in for Triton CI's C++ triton_shm_monitor: trtis's Python backend
keeps no `triton_python_backend_shm_region*` regions in /dev/shm, so no
monitor is ever made; the class exists for the import."""


class SharedMemoryManager:
    def __init__(self, name):
        self.name = name

    def free_memory(self):
        return 0
