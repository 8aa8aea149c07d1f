from app.core.memory import tune_allocator, trim_heap


def test_allocator_tuning_applies_on_glibc():
    assert tune_allocator() is True  # glibc here; mallopt returns 1 on success
    trim_heap()
